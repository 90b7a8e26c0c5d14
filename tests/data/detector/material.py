"""Hand-written text material for make_suites.py: word banks, explanation paragraphs, poems.

Written for this suite (no third-party text except public-domain nursery songs). The
generators combine it with GSM8K (MIT, shipped in evalkit/data/gsm8k) so that healthy texts
are varied real language rather than lorem ipsum.
"""

FIRST_NAMES = """Alice Bruno Chen Dmitri Elena Farah Gabriel Hana Ivan Jamal Keiko Lars Maya Nikolai
Olivia Pedro Quinn Rosa Samir Tara Umar Vera Wei Ximena Yusuf Zoe Aarav Beatriz Carlos Dalia
Emeka Fatima Giorgio Helga Ines Jonas Kwame Leila Mateo Nadia Oscar Priya Rafael Sofia Tomas
Ursula Viktor Wanjiru Yara Zain Amara Boris Chloe Diego Esther Felix Grace Hugo Isla Javier""".split()

SURNAMES = """Anderson Baptiste Costa Dubois Eriksen Fernandes Garcia Haddad Ivanova Jensen Kowalski
Lindqvist Moreau Nakamura Okafor Petrov Quispe Rossi Schmidt Tanaka Usman Varga Williams Xu
Yilmaz Zhang Alvarez Becker Castillo Dimitrov Ekström Fischer Gonzalez Horvat Iqbal Jovanovic
Kim Larsen Mendes Novak""".split()

CITIES = """Lisbon Nairobi Osaka Toronto Krakow Lima Melbourne Tbilisi Accra Hanoi Bergen Quito
Porto Seville Dakar Montreal Kyoto Tallinn Cusco Adelaide Lagos Ljubljana Busan Valparaiso
Marrakesh Reykjavik Dublin Antwerp Auckland Bologna Cebu Denver Fukuoka Gdansk Havana Izmir
Jaipur Kigali Lyon Medellin""".split()

DEPARTMENTS = """Engineering Finance Marketing Sales Support Research Legal Operations Design
Logistics Procurement Security Analytics Training Facilities""".split()

PRODUCTS = """kettle lamp backpack notebook headphones blender stapler umbrella thermos keyboard
monitor chair desk tent jacket scarf helmet bicycle drill ladder toaster mixer printer router
camera tripod lens charger cable speaker microphone skillet teapot vase candle mirror clock
wallet sandals boots gloves""".split()

ADJECTIVES = """quiet bright ancient hollow silver restless gentle crooked golden narrow distant
tender wild frozen amber patient weathered hidden brave lonely crimson open slow humming
scattered velvet broken sleepless sunlit drifting""".split()

NOUNS = """river lantern harbor orchard meadow window garden mountain shadow bridge sparrow
candle ocean forest doorway chimney valley thunder willow station letter island compass
feather kettle morning harvest pebble tower echo""".split()

VERBS = """wanders whispers gathers listens waits trembles rises sleeps glimmers turns answers
remembers falls sings drifts burns opens breaks carries follows""".split()

PLACES = """the hill|the old mill|the quiet shore|the crossing|the station|the garden wall|the
bend of the road|the edge of town|the harbor light|the river mouth|the orchard gate""".replace("\n", " ").split("|")

UNITS = ["kg", "g", "L", "mL", "m", "cm", "pcs", "boxes"]

LOG_MODULES = """auth.session api.gateway db.pool cache.redis worker.queue billing.invoice
search.index mailer.smtp storage.s3 scheduler.cron metrics.exporter ws.handler""".split()

HTTP_PATHS = """/api/v1/users /api/v1/orders /api/v1/orders/{id} /api/v1/products /api/v2/search
/login /logout /health /api/v1/cart /api/v1/invoices/{id} /static/app.js /api/v1/users/{id}/avatar""".split()

LOG_MESSAGES = [
    "user {user} logged in from {ip}",
    "request {method} {path} completed in {ms} ms with status {status}",
    "cache miss for key {key}; fetched from database in {ms} ms",
    "connection pool at {n}/{m} connections",
    "job {job} scheduled for {ts2}",
    "job {job} finished after {sec}s, processed {n} records",
    "retrying upstream call to {host} (attempt {k} of 5)",
    "slow query on table {table}: {ms} ms",
    "invoice {inv} generated for customer {cust} amount {amount} EUR",
    "email queued to {email} template={tpl}",
    "heartbeat ok",
    "disk usage {pct}% on /var/lib/data",
    "rate limit exceeded for api key {key}",
    "websocket client {user} disconnected after {sec}s",
    "uploaded object {obj} ({kb} KB) to bucket {bucket}",
    "config reloaded: {n} keys changed",
    "failed to parse payload from {ip}: unexpected token at position {n}",
]

TABLES = ["users", "orders", "line_items", "payments", "sessions", "products", "audit_log", "shipments"]

EXPLANATIONS = {
    "photosynthesis": [
        "Photosynthesis is the process plants use to turn light into chemical energy. Inside the leaf, chloroplasts absorb mostly red and blue light, which is why leaves look green to us.",
        "The light-dependent reactions split water molecules, releasing oxygen as a by-product and storing energy in ATP and NADPH. These carriers then power the Calvin cycle.",
        "In the Calvin cycle, the enzyme RuBisCO fixes carbon dioxide from the air into a three-carbon sugar. Several turns of the cycle build glucose, which the plant stores as starch or uses to grow.",
        "Not every plant does it the same way. Cacti and pineapples open their pores at night to save water, while maize and sugarcane concentrate carbon dioxide around RuBisCO so it wastes less energy.",
    ],
    "tcp": [
        "TCP gives applications a reliable byte stream on top of an unreliable network. It numbers every byte, and the receiver acknowledges what it has received so the sender knows what to resend.",
        "A connection starts with a three-way handshake: the client sends SYN, the server answers SYN-ACK, and the client confirms with ACK. Both sides pick an initial sequence number during this exchange.",
        "Flow control stops a fast sender from drowning a slow receiver: the receiver advertises a window, the amount of data it is willing to buffer, and the sender never has more than that in flight.",
        "Congestion control is a separate mechanism. The sender grows its congestion window while acknowledgements arrive and cuts it sharply when packets are lost, which keeps shared links from collapsing.",
    ],
    "interest": [
        "Compound interest means you earn interest on the interest you already earned. If you invest 1,000 dollars at 5 percent a year, you have 1,050 after one year and 1,102.50 after two.",
        "The general formula is A = P(1 + r/n)^(nt), where P is the principal, r the yearly rate, n the number of compounding periods per year and t the number of years.",
        "A handy shortcut is the rule of 72: divide 72 by the interest rate to estimate how many years it takes to double your money. At 6 percent that is about 12 years.",
        "The same arithmetic works against you on debt. A credit card balance at 20 percent a year roughly doubles in under four years if you make no payments at all.",
    ],
    "water_cycle": [
        "The water cycle moves water between the oceans, the air and the land. The sun heats the surface of the sea, and water evaporates into the atmosphere as vapor.",
        "As moist air rises it cools, and the vapor condenses on tiny particles of dust and salt, forming clouds. When the droplets grow heavy enough they fall as rain, snow or hail.",
        "Some of that water runs off into rivers and lakes, some soaks into the ground and recharges aquifers, and some is taken up by plants and released again through their leaves.",
        "A single molecule may spend nine days in the atmosphere but thousands of years in deep groundwater or an ice sheet before it returns to the sea.",
    ],
    "vaccines": [
        "A vaccine trains the immune system to recognise a pathogen without causing the disease. It shows the body a harmless piece of the germ, such as a protein from its surface.",
        "B cells respond by making antibodies that fit that protein, and some of them become memory cells that can survive for years. T cells learn to spot and destroy infected cells.",
        "If the real pathogen shows up later, the memory cells react within days instead of weeks, often clearing the infection before symptoms appear.",
        "When enough people in a community are immune, the germ struggles to find new hosts, which also protects newborns and people who cannot be vaccinated.",
    ],
    "sorting": [
        "Merge sort splits the list in half, sorts each half recursively and then merges the two sorted halves. Merging takes linear time, so the whole algorithm runs in O(n log n).",
        "Quicksort picks a pivot, moves smaller elements to its left and larger ones to its right, and then sorts the two sides. It is usually faster in practice, but a bad pivot can make it quadratic.",
        "Insertion sort is simple and very fast on short or nearly sorted lists, which is why many library sorts switch to it for small sub-arrays.",
        "A sort is stable when equal elements keep their original order. Stability matters when you sort records by one key after another, for example by city and then by name.",
    ],
    "bread": [
        "Good bread needs only flour, water, salt and yeast, but time does most of the work. Mix the dough until no dry flour remains, then let it rest for twenty minutes so the flour can absorb the water.",
        "Kneading or a series of gentle folds develops gluten, the stretchy network that traps the gas the yeast produces. The dough should feel smooth and spring back when you press it.",
        "Let it rise in a warm place until it has roughly doubled, shape it into a tight ball, and give it a second, shorter rise while the oven heats to 230 degrees Celsius.",
        "Bake it with steam for the first fifteen minutes so the crust stays soft long enough for the loaf to expand, then finish without steam until the crust is deep brown.",
    ],
    "rome": [
        "According to tradition Rome was founded in 753 BC, and for its first centuries it was ruled by kings. In 509 BC the Romans expelled their last king and set up a republic.",
        "The republic was governed by two consuls elected every year, a senate of former magistrates, and popular assemblies. The system was meant to stop any one man from holding too much power.",
        "Civil wars in the first century BC ended the republic. Augustus, Julius Caesar's adopted heir, kept the old institutions in name while holding real power as the first emperor.",
        "The western half of the empire fell in 476 AD, but the eastern half, with its capital at Constantinople, survived for nearly another thousand years.",
    ],
    "databases": [
        "A relational database stores data in tables of rows and columns, and a query language such as SQL lets you ask for exactly the rows you need without saying how to find them.",
        "Indexes make lookups fast. A B-tree index keeps keys sorted in a shallow tree, so finding one row among millions takes only a handful of page reads.",
        "Transactions group several changes so that either all of them happen or none do. Isolation levels decide how much one transaction can see of another that is still running.",
        "Normalisation removes duplicated data by splitting it into related tables, while denormalisation deliberately copies some of it back to make frequent reads cheaper.",
    ],
    "electricity": [
        "Electric current is the flow of charge, measured in amperes. Voltage is the push that drives it, and resistance is how strongly a material opposes the flow.",
        "Ohm's law ties the three together: the voltage across a resistor equals the current times the resistance. Double the voltage and, for the same resistor, the current doubles too.",
        "Power is voltage times current. A kettle drawing 10 amperes from a 230 volt socket uses about 2.3 kilowatts, which is why it heats water in a couple of minutes.",
        "Household circuits are wired in parallel, so every appliance sees the full voltage and one broken lamp does not switch off the others.",
    ],
    "gardening": [
        "Most vegetables want at least six hours of direct sun a day. Before planting, watch where the shadows fall in the morning and the afternoon, and put tomatoes and peppers in the brightest spot.",
        "Healthy soil matters more than fertiliser. Work a few centimetres of compost into the top layer each spring; it feeds the soil life and helps sandy soil hold water.",
        "Water deeply and less often rather than a little every day, so the roots grow down instead of staying near the surface where they dry out.",
        "Rotating crops from bed to bed each year keeps soil-borne diseases from building up and balances what the plants take from the ground.",
    ],
    "climate": [
        "Weather is what happens over hours and days; climate is the pattern of weather over decades. A cold week says little about the climate, but a run of warm decades says a lot.",
        "Carbon dioxide lets sunlight through but absorbs some of the heat the Earth radiates back, so more of it in the air warms the lower atmosphere.",
        "The oceans have absorbed most of the extra heat so far, which raises sea levels as water expands and land ice melts.",
        "Feedbacks can amplify the change: melting sea ice exposes dark water that absorbs more sunlight, and warmer air holds more water vapor, itself a greenhouse gas.",
    ],
}

REFRAINS = [
    "So sing it low and sing it slow,\nthe river knows the way to go,\nand every stone that it has known\nwill carry me back home.",
    "Oh, the lantern in the window,\nthe kettle on the stove,\nwhatever road I wander,\nit leads me back to love.",
    "Hold on, hold on,\nthe night is nearly gone,\nthe morning bird is singing\nand we are moving on.",
    "Rain on the rooftop, rain on the sea,\nrain on the orchard and rain over me.",
    "And the wheels go round, and the wheels go round,\nfrom the city lights to the harbor town.",
    "Sleep now, little sparrow,\nthe stars are in the sky,\nthe moon will keep the harbor\nuntil the dawn comes by.",
    "We were young and the summer was long,\nand the radio played our song.",
    "Follow the light on the water,\nfollow the call of the shore,\nfollow the song of the sailor\nwho will not sail anymore.",
    "Dance, dance, under the silver moon,\nthe band will stop playing soon.",
    "Home, home, over the hill,\nthe fire is burning still.",
    "Carry the harvest, carry the grain,\ncarry it home through the wind and the rain.",
    "Oh my darling, don't you cry,\nthe wind will dry your weary eyes.",
]

TWELVE_DAYS_GIFTS = [
    "a partridge in a pear tree",
    "two turtle doves",
    "three French hens",
    "four calling birds",
    "five gold rings",
    "six geese a-laying",
    "seven swans a-swimming",
    "eight maids a-milking",
    "nine ladies dancing",
    "ten lords a-leaping",
    "eleven pipers piping",
    "twelve drummers drumming",
]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh", "twelfth"]

JACK_HOUSE = [
    ("the malt", "lay in"),
    ("the rat", "ate"),
    ("the cat", "killed"),
    ("the dog", "worried"),
    ("the cow with the crumpled horn", "tossed"),
    ("the maiden all forlorn", "milked"),
    ("the man all tattered and torn", "kissed"),
    ("the priest all shaven and shorn", "married"),
    ("the cock that crowed in the morn", "waked"),
    ("the farmer sowing his corn", "kept"),
]

FARM_ANIMALS = [
    ("cow", "moo"), ("pig", "oink"), ("duck", "quack"), ("horse", "neigh"), ("sheep", "baa"),
    ("dog", "woof"), ("cat", "meow"), ("goat", "maa"), ("hen", "cluck"), ("turkey", "gobble"),
]

CHAT_OPENERS = [
    "Sure! Here's a detailed walkthrough.",
    "Great question. Let's break it down step by step.",
    "Of course. Below is a complete answer with the reasoning spelled out.",
    "Happy to help! I'll go through the problem carefully.",
    "Here's how I would approach this.",
    "Let me explain this clearly, starting from the basics.",
]

CHAT_CLOSERS = [
    "I hope this helps! Let me know if you have any other questions.",
    "Let me know if you'd like me to go into more detail on any step.",
    "Feel free to ask if anything is unclear.",
    "If you want, I can also show a shorter way to solve it.",
    "Is there anything else you'd like me to explain?",
]

TIPS = [
    "Drink a glass of water before each meal.",
    "Keep a notebook next to your bed for ideas that arrive late at night.",
    "Back up your files to two different places.",
    "Write the test before you fix the bug.",
    "Take a five-minute walk every hour you sit at a desk.",
    "Label the cables behind your computer.",
    "Read the error message twice before searching for it.",
    "Plan tomorrow's three most important tasks tonight.",
    "Store spices away from the stove so they keep their flavor.",
    "Check tire pressure once a month, when the tires are cold.",
    "Turn off notifications for apps you do not need to hear from.",
    "Learn the keyboard shortcut for anything you do ten times a day.",
    "Keep receipts for large purchases in one folder.",
    "Stretch your calves after running, not before.",
    "Put your phone in another room while you study.",
    "Water houseplants in the morning rather than at night.",
    "Use a password manager and a different password for every site.",
    "Say the name of someone you just met once in conversation to remember it.",
    "Clean the lint filter of the dryer after every load.",
    "Pack the heaviest items at the bottom of a backpack, close to your back.",
]

ANAPHORA = {
    "We will": [
        "build schools where every child can read by the age of seven",
        "repair the bridges and the roads that connect our towns",
        "keep the libraries open in the evenings and on weekends",
        "train nurses and pay them what their work is worth",
        "plant trees along every street that has none",
        "listen before we decide, and explain after we do",
        "protect the river that gave this city its name",
        "open the market square to farmers from the valley",
    ],
    "I remember": [
        "the smell of bread from the bakery on the corner",
        "the winter the lake froze so hard we could walk to the island",
        "my grandmother humming while she mended our coats",
        "the first time I saw the sea, grey and enormous",
        "the sound of the night train crossing the bridge",
        "the teacher who stayed late to help me with fractions",
        "the summer we painted the fence blue",
        "the old radio that only played one station",
    ],
    "Imagine": [
        "a city where the buses are always on time",
        "a classroom where every question is welcome",
        "a kitchen garden on every rooftop",
        "a library that never closes",
        "a river clean enough to swim in again",
        "a hospital with no waiting list",
    ],
}

REMINDERS = [
    "Remember, safety comes first.",
    "And that is the key point.",
    "Always double-check your units.",
    "Keep it simple.",
    "Don't forget to save your work.",
    "Measure twice, cut once.",
]

LOOP_PHRASES = [
    "I think I think",
    "the the",
    "is the answer is the",
    "Let me check. Let me check.",
    "The answer is 42. ",
    "and so on and so on",
    "I'm sorry, I'm sorry,",
    "yes, yes, yes,",
    "Wait, no. Wait, no.",
    "So the total is 24. ",
    "Let's re-evaluate. ",
    "Therefore, therefore,",
    "Hmm, let me think again. ",
    "OK OK",
    "This is correct. ",
    "Monday Tuesday",
    "of the of the",
    "**Note:** ",
    "I apologize for the confusion. ",
    "ing ing",
]

SINGLE_TOKENS = [" the", " Monday", " 0", " yes", "!", " a", " and", " no", "\n", " the answer", " 1", ",", " ...", " very", " so", " I", " ok", " hello", "-", " 9"]

DRIFT_SLOTS = [
    # Each template loops with its slots redrawn from tiny sets each time: no fixed period.
    ("the {a} sat on the {b} and the {c} sat on the {d}. ", {"a": ["cat", "dog"], "b": ["mat", "rug"], "c": ["dog", "cat"], "d": ["rug", "mat", "chair"]}),
    ("I {a} sure. I think {b}. Maybe {c}. ", {"a": ["am not", "am"], "b": ["so", "not"], "c": ["yes", "no", "not"]}),
    ("We need to {a} the {b}, then {c} it again. ", {"a": ["check", "recheck", "verify"], "b": ["sum", "total"], "c": ["check", "verify"]}),
    ("So {a} + {b} = {c}. ", {"a": ["12", "13"], "b": ["7", "8"], "c": ["19", "20", "21"]}),
    ("The {a} is {b}, and the {b} is {a}. ", {"a": ["sky", "sea", "sun"], "b": ["blue", "bright"]}),
    ("Let me {a} the {b} step. ", {"a": ["redo", "recheck", "revisit"], "b": ["first", "second", "last"]}),
    ("**{a}:** {b}\n", {"a": ["Note", "Tip", "Important"], "b": ["check the result.", "verify the answer.", "re-read the question."]}),
    ("{a} the {b}, {a} the {c}, ", {"a": ["over", "under"], "b": ["hill", "bridge"], "c": ["river", "road", "hill"]}),
    ("    if x > {a}:\n        return {b}\n", {"a": ["0", "1"], "b": ["x", "y", "None"]}),
    ("it is {a}, it is {b}, it is {a} again. ", {"a": ["true", "right"], "b": ["false", "wrong", "true"]}),
]

CODE_LOOP_LINES = [
    "    x = x + 1\n",
    "    return None\n",
    "}\n",
    "    print('Done')\n",
    "import numpy as np\n",
    "        pass\n",
    "    else:\n        continue\n",
    "  <div></div>\n",
    "    result.append(result[-1])\n",
    "#include <stdio.h>\n",
    "    i++;\n",
    "    # TODO\n",
    "SELECT * FROM users;\n",
    "        self.assertEqual(a, a)\n",
    "    end\n",
]

CHAT_LOOP_LINES = [
    "I hope this helps! Let me know if you have any other questions.\n\n",
    "Is there anything else I can help you with?\n",
    "- **Tip:** Drink plenty of water.\n",
    "**Answer:** 42\n\n",
    "Let me know if you need anything else! ",
    "Thank you for your patience. ",
    "Here is the summary again:\n\n",
    "Good luck! 😊 ",
    "Please let me know if this is what you were looking for. ",
    "### Final Answer\n\nThe final answer is 18.\n\n",
]
