"""Hand-written material for garbled.py: prose in other languages and scripts, thinking-model
phrases, words that are legitimately written twice, and the fragments a token soup is drawn from.

Written for this suite (no third-party text). The sentences are plain, everyday statements;
the generators shuffle and combine them, so a document never repeats one by accident.
"""

CHINESE = ["今天早上我们去公园散步，天气非常好。", "这个问题看起来很简单，但是我们需要慢慢地想一想。", "他每天都坚持跑步，已经坚持了三年。", "请大家认真看看这份报告，然后提出自己的意见。", "这家餐厅的菜很好吃，价格也比较便宜。", "我们的团队下个月要发布新版本的软件。", "学习一门新的语言需要时间和耐心。", "她常常在周末去图书馆看书。", "这座城市的交通在早上和晚上特别拥挤。", "如果明天下雨，我们就把活动改到室内。", "老师让同学们把作业交上来，然后大家一起讨论。", "这本书讲的是一个小村庄里的人们的故事。", "我们应该先把数据清洗干净，再开始训练模型。", "孩子们在院子里高高兴兴地玩游戏。", "谢谢你的帮助，没有你我们不可能按时完成。", "他说话的时候总是慢慢的，很少着急。", "冬天的时候，这里的湖面会结一层厚厚的冰。", "我们需要重新检查一下每一个步骤的计算结果。", "这个函数的输入是一个列表，输出是它的长度。", "公司决定明年在上海和深圳各开一个新的办公室。", "妈妈每天早上六点起床给全家人做早饭。", "经过仔细的计算，我们发现总共需要十二个箱子。", "大家好好休息，明天早上八点在门口集合。", "这种植物喜欢阳光，但是不能浇太多的水。", "他把房间打扫得干干净净，然后坐下来喝茶。"]

CHINESE_TECH = ["我们使用 PyTorch 的 tensor 来存储模型的参数。", "使用PyTorch的tensor进行矩阵乘法时要注意形状。", "在 Linux 服务器上运行 docker compose up 就可以启动所有服务。", "这个 API 返回的是 JSON 格式的数据，字段名都是小写。", "把 batch size 调到 64 以后，GPU 显存就不够用了。", "用pip安装numpy之后，再运行python脚本。", "我们的CI在每次push之后都会跑一遍unit test。", "请在config.yaml里把learning_rate改成0.001。", "这个bug只在开启CUDA graph的时候出现。", "模型在GSM8K上的准确率从0.94降到了0.87。", "先用git checkout切换到main分支，再合并代码。", "vLLM和SGLang都支持OpenAI兼容的HTTP接口。", "把日志级别设置成DEBUG，就能看到每一个request的细节。", "训练的时候loss一直在下降，但是验证集上的accuracy没有提高。", "这个Transformer模型一共有32层，每层有32个attention head。"]

RUSSIAN = ["Сегодня утром мы пошли гулять в парк, погода была прекрасная.", "Эта задача кажется простой, но над ней нужно подумать.", "Он каждый день бегает по утрам уже три года подряд.", "Пожалуйста, внимательно прочитайте отчёт и напишите свои замечания.", "В этом ресторане очень вкусно готовят, и цены вполне разумные.", "В следующем месяце наша команда выпускает новую версию программы.", "Изучение нового языка требует времени и терпения.", "По выходным она часто ходит в библиотеку.", "Утром и вечером в городе бывают большие пробки.", "Если завтра пойдёт дождь, мы перенесём встречу в помещение.", "Учитель попросил учеников сдать домашнее задание.", "Эта книга рассказывает о жизни людей в маленькой деревне.", "Сначала нужно очистить данные, а потом обучать модель.", "Дети весело играют во дворе после школы.", "Спасибо за помощь, без вас мы бы не успели вовремя.", "Зимой озеро покрывается толстым слоем льда.", "Давайте ещё раз проверим результат каждого шага.", "Компания решила открыть новые офисы в Казани и Новосибирске.", "После тщательного подсчёта оказалось, что нужно двенадцать коробок.", "Это растение любит солнце, но его нельзя слишком часто поливать."]

RUSSIAN_TECH = ["Мы используем PyTorch для обучения модели на GPU.", "Запустите docker compose up, чтобы поднять все сервисы.", "Этот API возвращает данные в формате JSON.", "После увеличения batch size до 64 памяти GPU перестало хватать.", "Установите numpy через pip и запустите скрипт на Python.", "Ошибка появляется только при включённом CUDA graph.", "Точность модели на GSM8K упала с 0.94 до 0.87.", "Переключитесь на ветку main с помощью git checkout.", "Поставьте уровень логирования DEBUG, чтобы видеть каждый request."]

JAPANESE = ["今朝は天気がとても良かったので、公園を散歩しました。", "この問題は簡単そうに見えますが、ゆっくり考える必要があります。", "彼は毎日ジョギングを続けていて、もう三年になります。", "報告書をよく読んでから、意見を書いてください。", "このレストランの料理はおいしくて、値段も手頃です。", "来月、私たちのチームはソフトウェアの新しいバージョンをリリースします。", "新しい言語を学ぶには時間と忍耐が必要です。", "彼女は週末によく図書館へ行きます。", "朝と夕方は、この町の道路がとても混雑します。", "明日雨が降ったら、イベントを屋内に移します。", "子どもたちは庭で楽しそうに遊んでいます。", "手伝ってくれてありがとうございます。時々、本当に助かります。", "冬になると、湖の表面に厚い氷が張ります。", "もう一度、各ステップの計算結果を確認しましょう。", "会社は来年、大阪と福岡に新しいオフィスを開く予定です。"]

JAPANESE_TECH = ["PyTorchのtensorをGPUに転送してから計算します。", "docker composeでサービスを起動してください。", "このAPIはJSON形式でデータを返します。", "batch sizeを64にするとGPUのメモリが足りなくなります。", "pipでnumpyをインストールしてからPythonのスクリプトを実行します。", "このバグはCUDA graphを有効にしたときだけ発生します。", "GSM8Kでの正解率が0.94から0.87に下がりました。", "git checkoutでmainブランチに切り替えてからマージします。"]

KOREAN = ["오늘 아침에 공원에서 산책을 했습니다.", "이 문제는 쉬워 보이지만 천천히 생각해야 합니다.", "우리 팀은 다음 달에 새 버전을 출시합니다.", "새로운 언어를 배우려면 시간과 인내가 필요합니다.", "주말에는 자주 도서관에 갑니다."]

SCIENCE = ["The cell membrane is about 7 μm thick in this micrograph, and the scale bar shows 10 μm.", "The temperature change ΔT was 4.2 K, so the heat absorbed is Q = m·c·ΔT.", "We set the significance level α = 0.05 and the power 1 − β = 0.8.", "The resistance is 47 kΩ and the capacitor holds 100 μF, so τ = RC ≈ 4.7 s.", "The wavelength λ = 532 nm corresponds to green light.", "In the Greek alphabet, α, β and γ come first, and ω comes last.", "The standard deviation σ of the sample was 2.3 mm, and the mean μ was 41.7 mm.", "The angle θ between the two vectors is π/4, so cos θ = √2/2.", "A dose of 250 μg was given every 12 h for three days.", "The mixing time was 30 μs and the reaction rate k = 3.1 × 10⁴ s⁻¹."]

THINKING_OPENERS = ["Okay, let me try to figure this out.", "Let me read the problem again carefully.",
                    "Hmm, so the question asks for", "Alright, let's break this down.",
                    "First, I need to understand what is being asked."]
THINKING_CHECKS = ["Wait, let me re-check that.", "Wait, let me re-check the calculation.",
                   "Hmm, wait. Let me verify this step again.", "Let me double-check.",
                   "Wait, is that right? Let me recompute.", "Actually, let me re-check the numbers.",
                   "Hold on, let me re-read the question.", "Let me verify that once more.",
                   "Wait, maybe I made a mistake here.", "Hmm, that doesn't look right. Let me redo it."]
THINKING_CONFIRMS = ["Yes, that's correct.", "Okay, that checks out.", "So that part is right.",
                     "Good, the numbers match.", "Right, so my earlier step was fine."]
THINKING_PIVOTS = ["Alternatively, I could approach it differently.", "Another way to see it:",
                   "Let me try a different approach to be sure.", "Let me think about it another way."]

DOUBLED_NAMES = ["Bora Bora", "Pago Pago", "Walla Walla", "Sing Sing", "Wagga Wagga", "Baden Baden",
                 "Baubau", "Kota Kota", "Sirhan Sirhan", "Mahi Mahi", "Duran Duran", "Mau Mau", "Tora Tora"]
DOUBLED_EXPRESSIONS = ["bye bye", "chop chop", "tut tut", "so so", "no no", "yes yes", "ha ha", "knock knock",
                       "night night", "very very", "really really", "hush hush", "tsk tsk", "pooh pooh",
                       "choo choo", "there there", "now now", "well well", "quick quick", "come come"]
DOUBLED_GRAMMAR = ["What he had had was not enough.", "She said that that was the plan.",
                   "Whatever is is right, the poet wrote.", "The problem is is that nobody asked.",
                   "He had had a long day before the meeting.", "I know that that answer is wrong.",
                   "Those who can can, and those who can't teach.", "It depends on what the meaning of is is."]
CHINESE_REDUPLICATION = ["看看", "想想", "慢慢", "常常", "天天", "人人", "谢谢", "妈妈", "爸爸", "哥哥", "姐姐", "刚刚",
                         "渐渐", "高高兴兴", "干干净净", "清清楚楚", "试试", "听听", "走走", "说说"]

SQL_TABLES = ["orders", "customers", "payments", "shipments", "invoices", "products", "sessions", "events"]
SQL_COLUMNS = ["id", "customer_id", "amount", "status", "created_at", "updated_at", "region", "total", "quantity"]

# Fragments a token soup is drawn from: pieces of a multilingual BPE vocabulary.
CODE_FRAGMENTS = ["scalablytyped", "${", "_id", "();", "Stream", "Builder", "::", "=>", "__init", "async", "Impl",
                  ".get", "{\n", "});", "tmp", "ptr", "[i]", "@Override", "/**", "Exception", "Factory", "</div>",
                  "px", "0x", "std", "_t", "len", "self", "cfg", "Ctx", "Util", "::<", "&&", "!=", "+=", "__"]
OTHER_SCRIPTS = ["مرحبا", "كتاب", "السلام", "مدينة", "สวัสดี", "ภาษา", "ครับ", "안녕", "하세요", "한국어", "습니다",
                 "שלום", "ספר", "नमस्ते", "भाषा", "καλη", "μέρα", "Ελλάδα", "Հայաստան", "საქართველო"]
